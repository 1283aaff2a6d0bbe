# nats-server built from the version go.mod pins, on an empty base, with
# busybox (Debian's busybox-static) as the official image's few tools:
# wget for the healthcheck, sh and cat for deploy/stack.yaml, which reads
# the passwords from swarm secrets' files. It starts as the official
# image does: the compose command is its arguments.
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY nats-server /usr/local/bin/nats-server
ENV PATH=/usr/local/bin:/bin
ENTRYPOINT ["nats-server"]
