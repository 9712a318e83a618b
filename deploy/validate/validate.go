// Package validate checks prq's deployment files the way their consumers
// read them: the Prometheus alert rules with Prometheus's rule parser and
// rule engine, the Grafana dashboard's structure and every PromQL
// expression in it, and the Helm chart rendered by Helm and decoded
// strictly into Kubernetes' typed objects. It is a module of its own so
// that prq's go.mod does not carry Prometheus, Helm and Kubernetes.
// Run it with deploy/validate/run.sh.
package validate
