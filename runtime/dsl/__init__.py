"""DSL loading: the one YAML reader, the document models, the graph and its
checks, every problem located; easy-mode apps compiled into their graph."""
