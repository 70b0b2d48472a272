"""`fugu-lite serve`: the OpenAI-compatible endpoint in front of the worker pool.

What lives where:
- app.py: the settings (ServeSettings), the server's state (FuguServer), create_app and its
  routes, and `serve` (running it under uvicorn);
- answer.py: answering a chat request (routing, then the answer at once or streamed);
- disconnect.py: giving up on work for a client that left;
- stream.py: relaying a worker's stream to the client as server-sent events;
- dispatch.py: calling the routed worker, falling back to the next-best one;
- responses.py: what an answer carries besides the worker's body, and its bookkeeping;
- errors.py: errors in OpenAI's shape and the app's error handlers;
- chat_request.py: the chat-completions request as accepted (ChatCompletionRequest), with
  fugu-lite's own keys;
- request_checks.py: the checks behind its validators (tool and function turns, tools);
- request_parsing.py: a body -> a validated request, or a 400 naming each bad field;
- json_schema.py: walking a JSON schema node by node;
- api_error.py: ApiError, an error answered in OpenAI's shape;
- routing.py: which workers a request may use, and batched routing decisions;
- batching.py: micro-batching concurrent requests into one forward pass;
- breaker.py: a circuit breaker per worker;
- auth.py: endpoint API keys and keeping secrets out of output;
- body.py: reading a body within --max-body-bytes;
- log.py: the decision log (--log-requests);
- metrics.py: the Prometheus metrics;
- thread.py: ServerThread, the app under uvicorn in a background thread.

Nothing is re-exported here: import from the module (`fugu_lite.server.app.create_app`,
`fugu_lite.server.thread.ServerThread`). Importing the package stays cheap, since
workers.llama_cpp_schemas uses json_schema.py and the stub worker thread.py, while app.py
loads the router (torch) and the pool.
"""
