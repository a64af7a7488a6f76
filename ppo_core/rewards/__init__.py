"""What scores a response: the reward protocol and the weighted sum of several rewards (``base``), Python reward
functions (``functions``) and sequence-classifier reward models (``models``)."""
