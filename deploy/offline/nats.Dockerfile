# nats-server built from the version go.mod pins, on an empty base, with
# busybox (Debian's busybox-static) as wget for compose's healthcheck. It
# starts as the official image does: the compose command is its arguments.
FROM scratch
COPY nats-server /nats-server
COPY busybox /bin/wget
ENTRYPOINT ["/nats-server"]
