# Prometheus for the lab's Docker runtime and compose.yaml: Debian's prometheus 2.42 (the
# same server the local runtime uses), so it builds wherever a Debian mirror answers, with
# no image registry. Only the server binary is kept (it links libc alone): the package's
# dependencies and web assets would add about 380 MB. Build context: docker/prometheus/.
ARG BASE_IMAGE=debian:bookworm-20250520-slim
FROM ${BASE_IMAGE} AS package
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null

FROM ${BASE_IMAGE}
COPY --from=package /usr/bin/prometheus /usr/bin/promtool /usr/bin/
USER nobody
WORKDIR /tmp
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/tmp/prometheus"]
