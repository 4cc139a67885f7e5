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
COPY examples ./playbooks
# An unprivileged user owns /data and /files (a volume mounted there starts
# with this ownership; /files holds the uploads, docker-compose.yml shares it) and runs every command; nothing under /app is writable by it.
RUN groupadd --system --gid 10001 lemongraph \
 && useradd --system --uid 10001 --gid lemongraph --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin lemongraph \
 && mkdir -p /data /files && chown lemongraph:lemongraph /data /files
ENV LEMONGRAPH_PLAYBOOKS_DIR=/app/playbooks \
    LEMONGRAPH_DATA_DIR=/data
VOLUME ["/data"]
USER 10001:10001
ENTRYPOINT ["lemongraph"]
