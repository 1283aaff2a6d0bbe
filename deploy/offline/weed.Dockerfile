# SeaweedFS's weed (scripts/weed.sh builds it static) on an empty base,
# for compose.s3.yaml's S3 server. Debian's busybox-static is the shell
# that starts the server, copies the training file into its bucket and
# answers the healthcheck.
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
# weed's logs and its gRPC sockets go to /tmp.
RUN ["/bin/busybox", "mkdir", "-m", "1777", "/tmp"]
COPY weed /usr/bin/weed
