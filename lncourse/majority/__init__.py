"""Chapter 3, the majority task: the data (:mod:`.data`), the task and model (:mod:`.task`),
the multiset computation (:mod:`.multiset`, :mod:`.multiset_fused`), the configuration
and trainers (:mod:`.config`, :mod:`.train`, :mod:`.single`), the statistics a reviewer
reads (:mod:`.stats`) and figures; the stored runs' command line and their parameter
snapshots, the verdict, the benchmark and the ledger are :mod:`lncourse.evidence.majority`."""
