"""`firstgate serve --broker` and `firstgate worker`: runs on Celery workers, events
and stops through Redis (see `docs/architecture.md`, "Runs on Celery workers")."""
