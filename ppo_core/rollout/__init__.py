"""Collecting a rollout: sampling responses from the policy and scoring them (``collect``), with the sampling
loop (``sampling_loop``), the static-cache decode (``static_decode``) and the sampling copies of the policy
(``generation_copy`` on a GPU, ``sampling_copy`` on a CPU)."""
