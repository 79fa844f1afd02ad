"""The voice-agent service.

Set here, before anything imports numpy: its OpenBLAS keeps a helper thread per core busy-waiting
for ~0.1 s after every matrix product big enough to share out (the log-mel filterbank of each
Whisper decode and each end-of-turn model call). On two cores that spin cost about a third more CPU
per decode (0.31 -> 0.21 s for one pause decode) and took a core from the event loop and the other
decodes. The service's matrices are small; one thread each is faster. An operator's own value wins.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
