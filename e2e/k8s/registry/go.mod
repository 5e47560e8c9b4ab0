module atoll.invalid/e2e/k8s/registry

go 1.26.8

require github.com/google/go-containerregistry v0.22.1 // indirect

tool github.com/google/go-containerregistry/cmd/registry
