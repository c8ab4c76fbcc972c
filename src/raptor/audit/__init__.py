"""raptor.audit: empirical privacy audits that test the released mechanism the way an attacker would.

* :mod:`raptor.audit.bounds` -- eps lower bounds from attack scores (Clopper-Pearson threshold
  tests; the one-run bound of Steinke, Nasr & Jagielski 2023);
* :mod:`raptor.audit.mechanism` -- a white-box audit of one update's real release path;
* :mod:`raptor.audit.one_run` -- a one-run audit of a whole training run with canaries;
* :mod:`raptor.audit.report` -- JSON and the PNG of in vs out score distributions.
"""
