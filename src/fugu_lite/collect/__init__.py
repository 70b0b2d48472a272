"""`fugu-lite collect`: reward collection (every worker answers every task, a grader scores
each answer, the scores become RewardRecords).

What lives where:
- run.py: running a collection (collect, the Collector loop); its docstring describes the
  two files and how a run resumes;
- state.py: what is already done, rebuilt from the two files (CollectState: resume
  planning, the notes on what no longer fits, a finished task's RewardRecord);
- journal.py: the two files' lines on disk (LogEntry, default_log_path, validated_lines,
  torn-line repair);
- lock.py: the exclusive lock on the two files (exclusive_files);
- hashes.py: the hashes that say whether a saved answer or grade still fits (request_hash,
  local_hash, gguf_sha256, grading_hash, judge_hash);
- errors.py: CollectError;
- judge.py: the LLM judge's wrapper (each call logged) and the check that it is in the pool;
- summary.py: the run's counters, its summary and the end-of-run table and lines.
- sigterm.py: a run that SIGTERM stops as Ctrl-C does, whatever Ctrl-C's handler
  (run_until_stopped).

Nothing is re-exported here: import from the module (`fugu_lite.collect.run.collect`,
`fugu_lite.collect.journal.default_log_path`).
"""
