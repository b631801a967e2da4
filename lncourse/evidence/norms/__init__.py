"""Chapter 5's evidence: what its replication page and its tests read (see AUTHORING.md)."""
