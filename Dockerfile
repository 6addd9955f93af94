# Stage 1 builds the wheel (release profile, Rust extension included); stage 2 is a slim non-root runtime.
# No container engine on the build machines: CI lints this file with hadolint; build it by hand with
#   docker build -t devicehub .        and run it with docker compose (compose.yaml, see README).
FROM python:3.11-slim AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# libssl-dev, pkg-config: the DTLS engine links OpenSSL (the runtime's libssl3 comes with python:3.11-slim)
RUN apt-get update && apt-get install -y --no-install-recommends curl build-essential ca-certificates libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
# the toolchain the project is built and tested with (a floating "stable" made builds differ by date)
RUN curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain 1.95.0
ENV PATH="/root/.cargo/bin:${PATH}"
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir "maturin>=1.8,<2" && maturin build --release --out /wheels

FROM python:3.11-slim
# /keys: a named volume mounted there takes this owner (Docker copies it), so uid 10001 can write the API key
RUN useradd --create-home --uid 10001 devicehub && mkdir -p /data /keys && chown 10001:10001 /data /keys
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY docker/entrypoint.sh /usr/local/bin/devicehub-entrypoint
USER 10001
WORKDIR /home/devicehub
# the embedded store (SQLite) and the dev key file; mount a volume here to keep them
VOLUME ["/data"]
EXPOSE 8000/tcp 5683/udp 5684/udp
ENV DEVICEHUB_HOST=0.0.0.0 DEVICEHUB_DATA_DIR=/data
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('DEVICEHUB_HTTP_PORT', '8000'), timeout=2)"]
ENTRYPOINT ["devicehub-entrypoint"]
CMD ["serve"]
