# Stage 1 builds the wheel (release profile, Rust extension included); stage 2 is a slim non-root runtime.
# Not exercised by CI (no container engine on the build machines); `pip install .` is the tested path.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends curl build-essential ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
ENV PATH="/root/.cargo/bin:${PATH}"
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir "maturin>=1.8,<2" && maturin build --release --out /wheels

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 devicehub
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER devicehub
WORKDIR /home/devicehub
EXPOSE 8000/tcp 5683/udp 5684/udp
ENV DEVICEHUB_HOST=0.0.0.0
ENTRYPOINT ["devicehub"]
CMD ["serve", "--data-dir", "/home/devicehub/data"]
