"""Memory: a run's measured peak (``peak``), the bytes of tensors and models (``sizes``), the estimate of a config's
peak before it runs (``estimate``) and its printed report (``report``)."""
