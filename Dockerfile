# One image for the worker, the ticker and the gateway.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY compiler ./compiler
COPY topics ./topics
COPY stream ./stream
COPY agents ./agents
# gcc compiles the decision core (setup.py, mypyc); it is removed again afterwards.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && pip install --no-cache-dir . \
 && apt-get purge -y gcc libc6-dev && apt-get autoremove -y \
 && rm -rf /var/lib/apt/lists/* build
COPY playbooks ./playbooks
ENV LEMONGRAPH_PLAYBOOKS_DIR=/app/playbooks \
    LEMONGRAPH_DATA_DIR=/data
VOLUME ["/data"]
ENTRYPOINT ["lemongraph"]
