// Command kubebin is one binary holding the three real control-plane programs the
// end-to-end suite runs: an embedded etcd, kube-apiserver and kube-scheduler, all
// built from the Kubernetes release pinned in go.mod. One binary means one link
// step, which is most of the build time on a small machine.
package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubebin etcd DATA_DIR CLIENT_URL | kube-apiserver ARGS | kube-scheduler ARGS")
		os.Exit(2)
	}
	verb := os.Args[1]
	os.Args = append([]string{verb}, os.Args[2:]...)
	switch verb {
	case "etcd":
		os.Exit(runEtcd(os.Args[1:]))
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "kubebin: unknown program %q\n", verb)
		os.Exit(2)
	}
}

// runEtcd serves a single-member etcd on the given loopback URLs until SIGTERM.
func runEtcd(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kubebin etcd DATA_DIR CLIENT_URL PEER_URL")
		return 2
	}
	client, err := url.Parse(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebin etcd: client url:", err)
		return 2
	}
	peer, err := url.Parse(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebin etcd: peer url:", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Dir = args[0]
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	// The suite's cluster lives for minutes; fsync on every write only slows it.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebin etcd:", err)
		return 1
	}
	defer e.Close()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd ready")
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "kubebin etcd:", err)
		return 1
	}
	select {
	case <-stop:
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "kubebin etcd:", err)
		return 1
	}
}
