"""The ppo-tune dashboard: a read-only Streamlit app over the tuner's studies (entry file: dashboard/app.py).

It reads Optuna's tables and the tuner's metric and sample tables through read-only connections, and
never trains or writes. Besides Streamlit, Optuna, SQLAlchemy, pandas and plotly it imports only the
tuner's light modules (``tuner.attrs``, ``tuner.paths``, ``tuner.database``, ``tuner.reports``,
``tuner.frontier_peak``, ``tuner.trial_records``) and ``ppo_core.metric_names``: never the trainer, torch or
transformers.

Modules, by job: ``optuna_tables`` (Optuna's tables read with plain SQL), ``study_reader`` (find and read a
study), ``frames`` (shape its data, pure pandas), ``charts`` and ``optuna_views`` (figures), ``frontier`` and
``frontier_charts`` (reward against KL, where the study's gold peaks), ``sample_grid`` (one prompt's generations,
trials as columns), ``health_rules`` (warning signs, pure), ``advice`` (what to try next for the whole study, pure),
``validation_view`` (validated results beside the tuning values), ``session`` (Streamlit caches and session
state), ``ui`` (sidebar, page frame, widgets), ``app`` (the entry file), ``launch`` (``ppo-tune dashboard``). The
pages in ``app_pages/`` import these; these never import a page.
"""
