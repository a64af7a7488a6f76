"""The PPO math and the update: masked statistics (``masked``), KL estimators and controllers (``kl``,
``kl_reach``), reward shaping and GAE (``advantages``), group baselines (``group_advantages``), the estimators by name
(``estimators``), the clipped losses (``losses``), the objective of one mini-batch (``objective``), log-probs from
the logits (``token_head``) and the epochs over mini-batches (``update``)."""
