"""`fugu-lite collect`: reward collection (every worker answers every task, a grader scores
each answer, the scores become RewardRecords).

What lives where:
- run.py: running a collection (collect, the Collector loop); its docstring describes the
  two files and how a run resumes;
- state.py: the run's state on disk (CollectState, the call log's entries, the hashes that
  say whether a saved answer or grade still fits, torn-line repair, the files' lock,
  CollectError, default_log_path);
- judge.py: the LLM judge's wrapper (each call logged) and the check that it is in the pool;
- summary.py: the run's counters, its summary and the end-of-run table and lines.

Nothing is re-exported here: import from the module (`fugu_lite.collect.run.collect`,
`fugu_lite.collect.state.default_log_path`).
"""
