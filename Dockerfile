# The hookbridge image: `docker compose up` builds it (docker-compose.yml).
# No Docker engine runs where this project is tested: tests/packaging/test_image.py replays this file
# step by step (FROM ... AS, COPY [--from], WORKDIR, RUN pip install / pip wheel / useradd / rm,
# USER, ENTRYPOINT, CMD) into fresh folders and virtualenvs and runs the result; a step it does not
# know fails that test.

# Stage 1: the wheel. Its per-message path (the MQTT codec, the router, message ids) is compiled
# into C extensions with mypyc (setup.py, docs/development.md#the-compiled-build), which needs a C
# compiler and Python's headers: the full python image has them, the slim one below has not.
FROM python:3.11 AS build
WORKDIR /src
# Everything the package declares (pyproject.toml, setup.py): the core, the backends, the Spark
# reports' `report` command (PySpark itself is the optional `spark` extra, not installed here: the
# command says how to add it), and the shipped config/, rules/ and templates/ for `hookbridge init`.
COPY pyproject.toml setup.py README.md ./
COPY bridge ./bridge
COPY actions ./actions
COPY spark_analytics ./spark_analytics
COPY config ./config
COPY rules ./rules
COPY templates ./templates
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Stage 2: the image, without the compiler: the wheel and its dependencies only.
FROM python:3.11-slim
# The bridge runs as this user, not root. Its home is the working folder, where compose mounts the
# spool volume: a new volume takes this folder's owner, so the bridge can write its spool there.
RUN useradd --system --user-group --uid 10001 --home-dir /var/lib/hookbridge --create-home hookbridge
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/hookbridge-*.whl && rm -rf /wheels
# Config, rules and templates are mounted here (templates/ beside rules/, as the CLI expects).
COPY templates /etc/hookbridge/templates
WORKDIR /var/lib/hookbridge
USER hookbridge
ENTRYPOINT ["hookbridge"]
CMD ["run", "-c", "/etc/hookbridge/bridge.conf", "-r", "/etc/hookbridge/rules"]
