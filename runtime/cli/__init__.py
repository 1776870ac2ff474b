"""`firstgate run / validate / index`: the command, the human view of a run,
and how errors are rendered."""
