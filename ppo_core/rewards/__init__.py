"""What scores a response: the reward protocol (``base``), Python reward functions (``functions``),
sequence-classifier reward models (``models``, read as ``pooling`` says), several summed with their weights and loaded
from a config's specs (``weighted``), and the held-out judges (``judges``)."""
