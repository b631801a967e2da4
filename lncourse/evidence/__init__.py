"""The evidence beneath the chapters: for each chapter (a folder named as the chapter's
own), its long runs and their GPU paths, the readings of its stored runs, its claims and
its ledger; :mod:`.claims` holds what they share. The replication pages and the tests
import it; nothing of the course does (``tests/test_package.py``)."""
