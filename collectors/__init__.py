"""collectors stage of the replmon pipeline (see DESIGN.md)."""
