"""The shortest-path task: a fixed random graph (``graph``), its text format (``text``) and tokenizer, trips
(``prompts``), gold (``gold``), preference pairs (``pairs``), SFT walks (``sft``), its parameters (``params``)
and its build (``build``)."""
