"""``python -m voiceagent.config`` prints the README configuration table."""

from voiceagent.config.variables import markdown_table

if __name__ == "__main__":  # pragma: no cover - documentation helper
    print(markdown_table())
