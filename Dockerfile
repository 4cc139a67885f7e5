# One image for the worker, the ticker and the gateway.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY compiler ./compiler
COPY topics ./topics
COPY stream ./stream
COPY agents ./agents
RUN pip install --no-cache-dir .
COPY playbooks ./playbooks
ENV LEMONGRAPH_PLAYBOOKS_DIR=/app/playbooks \
    LEMONGRAPH_DATA_DIR=/data
VOLUME ["/data"]
ENTRYPOINT ["lemongraph"]
