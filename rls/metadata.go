package rls

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is the dynamic metadata of an answer, as
// envoyproxy/ratelimit writes it: the domain; the descriptors, each with
// its entries as "key=value", its limit override and its hits_addend when
// given; the request's hits_addend when not 0; and the configured metadata
// of every limited descriptor that was not over its limit, merged (nested
// mappings merge, the first value of a key wins).
func dynamicMetadata(req *rlsv3.RateLimitRequest, app []applied, resp *rlsv3.RateLimitResponse) *structpb.Struct {
	f := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	f["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if n := req.GetHitsAddend(); n != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(n))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range app {
		a := &app[i]
		if a.rl == nil || a.unlimited || a.rl.metadata == nil || resp.Statuses[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		mergeStruct(passed, a.rl.metadata)
	}
	if len(passed.Fields) > 0 {
		f["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: f}
}

func descriptorStruct(d *rlv3.RateLimitDescriptor) *structpb.Struct {
	ents := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		ents = append(ents, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: ents})}
	if ov := d.GetLimit(); ov != nil {
		// The override in the protobuf text format, zero fields left out.
		var parts []string
		if n := ov.GetRequestsPerUnit(); n != 0 {
			parts = append(parts, "requests_per_unit:"+uitoa(uint64(n)))
		}
		if u := ov.GetUnit(); u != 0 {
			parts = append(parts, "unit:"+u.String())
		}
		if m := ov.GetUnitMultiplier(); m != nil {
			parts = append(parts, "unit_multiplier:{value:"+uitoa(uint64(m.GetValue()))+"}")
		}
		f["limit"] = structpb.NewStringValue(strings.Join(parts, " "))
	}
	if ha := d.GetHitsAddend(); ha != nil {
		f["hitsAddend"] = structpb.NewNumberValue(float64(ha.GetValue()))
	}
	return &structpb.Struct{Fields: f}
}

// mergeStruct adds src's fields to dst: a mapping present in both is
// merged, any other field already in dst stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		old, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if os, ns := old.GetStructValue(), v.GetStructValue(); os != nil && ns != nil {
			// Merge into a copy: the configured metadata is shared.
			c := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(os.Fields))}
			for kk, vv := range os.Fields {
				c.Fields[kk] = vv
			}
			mergeStruct(c, ns)
			dst.Fields[k] = structpb.NewStructValue(c)
		}
	}
}

func uitoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}
