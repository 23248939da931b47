"""vaswani-serve: the HTTP API (`server`: routes, lifespan, error handlers, uvicorn) over the translation service
(`service`: the checks, the batches, the answers), the gate before the API (`gate`), the bounds on a request
(`bounds`), the bodies it accepts (`bodies`), the one model thread (`worker`) and the metrics (`metrics`)."""
