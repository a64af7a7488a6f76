"""The ppo-tune dashboard: a read-only Streamlit app over the tuner's studies (entry file: dashboard/app.py).

It reads Optuna's tables and the tuner's metric and sample tables through read-only connections, and
never trains or writes. It may import any of the tuner's modules that load neither torch nor transformers, and of
ppo_core only what ``ppo_core.metric_names`` loads: never the trainer. The rule's one home is its test
(tests/test_dashboard/test_dashboard_data.py, ``test_the_dashboard_does_not_import_torch``), which imports every
module here and looks at what came with them; no list of allowed modules is kept beside it.

Modules, by job: ``optuna_tables`` (Optuna's tables read with plain SQL), ``study_reader`` (find and read a study),
``frames`` (shape its data, pure pandas), ``charts`` and ``optuna_views`` (figures), ``frontier`` and
``frontier_charts`` (reward against KL, where the study's gold peaks), ``population_frames`` and
``population_charts`` (a population study's segments, lineages, schedules and stitched curves), ``sample_grid`` (one
prompt's generations, trials as columns), ``health_rules`` (warning signs, pure), ``advice`` (what to try next for
the whole study, pure), ``validation_view`` (validated results beside the tuning values), ``session`` (Streamlit
caches and session state), ``ui`` (sidebar, page frame, widgets), ``app`` (the entry file), ``serve`` (``ppo-tune
dashboard``). The pages in ``app_pages/`` import these; these never import a page.
"""
