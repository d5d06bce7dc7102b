package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// One JSON-quoted string a line in, one verdict a line out: "ok <unscaled> <scale> <format>" (the exact
// value is unscaled * 10^-scale) or "error <Kubernetes' message>".
func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		text, err := strconv.Unquote(in.Text())
		if err != nil {
			fmt.Fprintf(out, "error unquote: %s\n", err)
		} else if q, err := resource.ParseQuantity(text); err != nil {
			fmt.Fprintf(out, "error %s\n", err)
		} else {
			d := q.AsDec()
			fmt.Fprintf(out, "ok %s %d %s\n", d.UnscaledBig().String(), d.Scale(), q.Format)
		}
		out.Flush()
	}
}
