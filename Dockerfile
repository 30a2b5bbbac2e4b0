# flashscope as one image for workshops: serves the app on 0.0.0.0:8000, needs no network at run time.
#   CPU (default):  docker build -t flashscope .
#   CUDA:           docker build --build-arg VARIANT=cuda -t flashscope:cuda .
#                   docker run --gpus all -p 8000:8000 flashscope:cuda
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
WORKDIR /src
RUN python -m venv /opt/venv
# The CPU image takes PyTorch's CPU build; the CUDA image its default build (CUDA libraries as
# wheels; the driver comes from the host through --gpus).
RUN if [ "$VARIANT" = "cuda" ]; then \
        pip install torch==2.13.0; \
    else \
        pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0; \
    fi
# The package carries its pages, static files (Plotly included) and shipped datasets as package
# data, so the installed venv is all the final stage needs. The redis extra keeps rooms shared
# by several server processes (FLASHSCOPE_REDIS_URL) working in the image.
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
COPY simulator ./simulator
COPY kernels ./kernels
COPY templates ./templates
COPY static ./static
# The project itself, with an extra: its versions are pyproject.toml's.
# hadolint ignore=DL3013
RUN pip install '.[redis]'

FROM ${PYTHON_IMAGE}
ARG VARIANT=cpu
# Triton compiles a small launcher with the system C compiler when it runs on a GPU; the CPU
# image runs kernels through Triton's interpreter and needs none.
# hadolint ignore=DL3008
RUN if [ "$VARIANT" = "cuda" ]; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --gid 10001 flashscope \
    && useradd --create-home --uid 10001 --gid 10001 flashscope
# Everything the app reads at run time is in the venv: the flashscope package with its pages,
# assets and datasets.
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/flashscope
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/api/health', timeout=4).status != 200)"]
CMD ["flashscope", "serve", "--host", "0.0.0.0", "--port", "8000"]
