// Package deploy holds the tests of Floodgate's deployment artefacts: the
// Helm chart (helm/floodgate), the kustomize base (kustomize/base) with an
// example overlay, and the Grafana dashboard and Prometheus alert rules
// (observability). It is a module of its own so that Helm's and
// Kubernetes' modules stay out of the product's go.mod; its tests build
// floodgate from the parent module.
package deploy
