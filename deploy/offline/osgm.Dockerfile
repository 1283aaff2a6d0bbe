# The osgm image without a registry: the static binaries scripts/images.sh
# built on this machine, on an empty base, as deploy/Dockerfile's nonroot
# user. Build context: the directory scripts/images.sh fills.
FROM scratch
COPY coordinator worker predict svmgen /usr/local/bin/
ENV PATH=/usr/local/bin
USER 65532:65532
ENTRYPOINT []
