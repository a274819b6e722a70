"""A local environment from a source checkout: a real etcd + kube-apiserver and a real
Chroma server as local processes. Used by the test fixtures, `make cluster-up` and
`summaryctl demo`; never by the operator in a cluster."""
