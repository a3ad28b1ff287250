// Command kubelet-checkpoint writes the kubelet v1.37.2's own allocation checkpoints
// (allocated_pods_state and actuated_pods_state) through the kubelet's own code
// (k8s.io/kubernetes/pkg/kubelet/allocation/state), for nodelet's test that it reads a node
// taken over from a kubelet: tests/data/kubelet-checkpoints/ holds what it wrote.
//
//	cd tests/support/k8s && go run ./kubelet-checkpoint ../../data/kubelet-checkpoints
package main

import (
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/allocation/state"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-checkpoint DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	logger := klog.Background()
	q := resource.MustParse
	// A pod with a regular container and a sidecar, resized while the kubelet ran: what was
	// allocated (cpu 300m) is not yet what was applied (cpu 200m).
	allocated := state.PodResourceInfo{
		ContainerResources: map[string]v1.ResourceRequirements{
			"app": {
				Requests: v1.ResourceList{v1.ResourceCPU: q("300m"), v1.ResourceMemory: q("64Mi")},
				Limits:   v1.ResourceList{v1.ResourceCPU: q("300m"), v1.ResourceMemory: q("64Mi")},
			},
			"sidecar": {
				Requests: v1.ResourceList{v1.ResourceCPU: q("50m")},
			},
		},
	}
	actuated := state.PodResourceInfo{
		ContainerResources: map[string]v1.ResourceRequirements{
			"app": {
				Requests: v1.ResourceList{v1.ResourceCPU: q("200m"), v1.ResourceMemory: q("64Mi")},
				Limits:   v1.ResourceList{v1.ResourceCPU: q("200m"), v1.ResourceMemory: q("64Mi")},
			},
			"sidecar": {
				Requests: v1.ResourceList{v1.ResourceCPU: q("50m")},
			},
		},
	}
	// A pod with pod-level resources.
	podLevel := state.PodResourceInfo{
		ContainerResources: map[string]v1.ResourceRequirements{"main": {}},
		PodLevelResources: &v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("128Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("256Mi")},
		},
	}
	for _, f := range []struct {
		name string
		pods map[string]state.PodResourceInfo
	}{
		{"allocated_pods_state", map[string]state.PodResourceInfo{
			"0b7e2c8a-1d2f-4c55-9e0a-5f6b7c8d9e01": allocated,
			"5c1d9f3e-2a4b-4d6c-8e7f-9a0b1c2d3e02": podLevel,
		}},
		{"actuated_pods_state", map[string]state.PodResourceInfo{
			"0b7e2c8a-1d2f-4c55-9e0a-5f6b7c8d9e01": actuated,
			"5c1d9f3e-2a4b-4d6c-8e7f-9a0b1c2d3e02": podLevel,
		}},
	} {
		s, err := state.NewStateCheckpoint(logger, dir, f.name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for uid, info := range f.pods {
			if err := s.SetPodResourceInfo(logger, types.UID(uid), info); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
}
