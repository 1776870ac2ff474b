"""Running a loaded workflow: the dispatcher, what a run reports, the
scheduler and error strategies, the response stream, the session and its
variables, limits, redaction, and running workflows as tools."""
