"""Chapter 3's evidence: what its replication page and its tests read (see AUTHORING.md):
the stored runs' command line (:mod:`.runs`) and the parameter snapshots it records
(:mod:`.snapshots`), the benchmark, the claims (:mod:`.claims`) and the ledger
(:mod:`.ledger`)."""
