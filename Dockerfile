# The hookbridge image: `docker compose up` builds it (docker-compose.yml).
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY actions ./actions
RUN pip install --no-cache-dir . && rm -rf /src
# Config, rules and templates are mounted here (templates/ beside rules/, as the CLI expects).
COPY templates /etc/hookbridge/templates
WORKDIR /var/lib/hookbridge
ENTRYPOINT ["hookbridge"]
CMD ["run", "-c", "/etc/hookbridge/bridge.conf", "-r", "/etc/hookbridge/rules"]
