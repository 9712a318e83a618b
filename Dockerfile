# prq: one static binary.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /prq ./cmd/prq

FROM gcr.io/distroless/static-debian12
COPY --from=build /prq /prq
USER nonroot
ENTRYPOINT ["/prq"]
