// The etcd server binary, built from the published go.etcd.io/etcd/server/v3 module: etcd's own
// main package lives in the repository's root module, which is not meant to be required, so this
// is the same one-line entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
