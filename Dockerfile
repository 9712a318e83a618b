# prq: one static binary.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# prq --version prints these (.git is not in the build context):
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) --build-arg DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
ARG VERSION=""
ARG COMMIT=""
ARG DATE=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" -o /prq ./cmd/prq

FROM gcr.io/distroless/static-debian12
COPY --from=build /prq /prq
USER nonroot
ENTRYPOINT ["/prq"]
