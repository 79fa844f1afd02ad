"""Call recording: both sides of a conversation as the caller heard them, stored in chunks while
the call goes on (:mod:`.recorder` on the loop, :mod:`.writer` on its thread, :mod:`.store` to
read them back). It may use Django's storage API; it imports no app."""
