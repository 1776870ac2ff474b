"""User templates (Jinja2): rendered inline under a CPU budget and the
rendering cap, or in the code sandbox; which of the two, decided once."""
