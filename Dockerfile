# A heaplens image to attach to services in containers: run it as a sidecar
# or an ephemeral debug container that shares the service's PID namespace,
# or on the node (docs/attach.md, "Containers"). Not built by the tests.
#
#   docker build -t heaplens .
#   docker run --rm -it --pid=container:SERVICE --cap-add SYS_PTRACE \
#       -v "$PWD:/captures" heaplens attach 1 --duration 60s
#
# heaplens is one static program with its libraries inside: it needs no
# package of the image, only a shell for kubectl debug users.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make bin/heaplens

FROM debian:bookworm-slim
COPY --from=build /src/bin/heaplens /usr/local/bin/heaplens
# Captures go here: mount a volume on it to keep them.
WORKDIR /captures
ENTRYPOINT ["heaplens"]
CMD ["help"]
