"""streaming stage of the replmon pipeline (see DESIGN.md)."""
