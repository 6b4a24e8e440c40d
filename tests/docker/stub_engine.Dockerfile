# A stand-in engine image for the Docker test: no GPU, no weights. It answers the OpenAI API
# (streaming completions, /health, /v1/models, vLLM-named /metrics) with the test suite's fake
# server, and takes `vllm serve`'s arguments, as the official vLLM image's entrypoint does.
# Built FROM the app's image, which already holds aiohttp.
ARG APP_IMAGE
FROM ${APP_IMAGE}
COPY fake_openai.py /opt/stub/fake_openai.py
ENTRYPOINT ["python", "/opt/stub/fake_openai.py"]
