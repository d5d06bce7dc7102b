// Command kubebin is one binary holding the real control-plane programs the
// end-to-end suite runs: an embedded etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager's ResourceClaim controller (it makes a pod's claims from
// its ResourceClaimTemplates), all built from the Kubernetes release pinned in
// go.mod. One binary means one link step, which is most of the build time on a
// small machine.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubebin etcd DATA_DIR CLIENT_URL PEER_URL | kube-apiserver ARGS | kube-scheduler ARGS | resourceclaim-controller KUBECONFIG")
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
	case "resourceclaim-controller":
		os.Exit(runClaimController(os.Args[1:]))
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

// runClaimController runs the ResourceClaim controller as kube-controller-manager
// does (same constructor, same informers), without the other controllers: the
// suite has no kubelets, nodes or workloads for them to act on. FEATURE_GATES
// (kube-controller-manager's --feature-gates syntax) must match the API server's:
// with GenericWorkload off the controller refuses to make the claims of a pod
// that belongs to a PodGroup.
func runClaimController(args []string) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: kubebin resourceclaim-controller KUBECONFIG [FEATURE_GATES]")
		return 2
	}
	if len(args) == 2 {
		if err := utilfeature.DefaultMutableFeatureGate.Set(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "kubebin resourceclaim-controller: --feature-gates:", err)
			return 2
		}
	}
	config, err := clientcmd.BuildConfigFromFlags("", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebin resourceclaim-controller:", err)
		return 2
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebin resourceclaim-controller:", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := resourceclaim.NewController(
		klog.FromContext(ctx), client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebin resourceclaim-controller:", err)
		return 1
	}
	factory.Start(ctx.Done())
	fmt.Println("resourceclaim-controller running")
	controller.Run(ctx, 4)
	return 0
}
