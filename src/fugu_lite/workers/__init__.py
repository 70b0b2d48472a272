"""The worker LLMs: the pool's config and the calls to them, remote or local (llama.cpp).

What lives where:
- config.py: the pool's config (PoolConfig, WorkerConfig, LocalServerConfig,
  load_pool_config, resolve_gguf);
- pool.py: WorkerPool, the calls (limits, retries, local restarts; Judge, judge_from_pool);
- results.py: what a call gives back (CallResult, Usage, usage_cost, json_safe);
- attempts.py: one attempt at a call: its answer as asked (Answer) or its failure described
  (Failure, describe_failure, broken_stream_error), the CallResult of a call that failed;
- streams.py: a streamed call's chunks (WatchedStream, OpenStream, chunk_shaper, CUT_STREAM);
- retries.py: which failures are tried again (RETRYABLE_KINDS) and the backoff;
- api_keys.py: the workers' API keys (read_key, redact, PoolStartError);
- errors.py: what a failed call means (classify_error, WorkerCallError, the refusals);
- output_limits.py: the output-token limit under the name each worker reads;
- preflight.py: what would stop the pool's start (keys, GGUF files, llama.cpp's server,
  local params), checked before `serve` listens and before `demo`'s first stage;
- local_server.py: local workers' llama.cpp server processes (LocalServer);
- llama_cpp_requests.py, llama_cpp_schemas.py, llama_cpp_answers.py: a local worker's
  requests, JSON schemas and answers in the form llama.cpp takes and OpenAI gives.

Nothing is re-exported here: import from the module (`fugu_lite.workers.pool.WorkerPool`,
`fugu_lite.workers.config.load_pool_config`).
"""
