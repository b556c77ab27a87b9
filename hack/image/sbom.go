package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// goSumProperty holds a module's go.sum hash (h1:...), which is no digest
// of a file CycloneDX's hashes could name.
const goSumProperty = "golang:go.sum"

// NewCLISBOM describes the CLI: the daemon binaries' Go modules (read from
// their build information) under the application at version.
func NewCLISBOM(version string, created time.Time, bins []string) (*cdx.BOM, error) {
	main, deps, err := goComponents(bins)
	if err != nil {
		return nil, err
	}
	app := appComponent(main, version)
	return newBOM(app, created, []cdx.Component{}, deps), nil
}

// NewImageSBOM describes the image index repo@digest: the daemon
// application in it and the application's Go modules.
func NewImageSBOM(version, repo string, digest v1.Hash, created time.Time, bins []string) (*cdx.BOM, error) {
	main, deps, err := goComponents(bins)
	if err != nil {
		return nil, err
	}
	app := appComponent(main, version)
	name := repo[strings.LastIndex(repo, "/")+1:]
	purl := fmt.Sprintf("pkg:oci/%s@%s?repository_url=%s&tag=%s", name, strings.Replace(digest.String(), ":", "%3A", 1), repo, version)
	image := cdx.Component{
		BOMRef:     purl,
		Type:       cdx.ComponentTypeContainer,
		Name:       repo,
		Version:    version,
		PackageURL: purl,
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: digest.Hex}},
	}
	return newBOM(image, created, []cdx.Component{app}, deps), nil
}

func appComponent(mainPath, version string) cdx.Component {
	purl := goPURL(mainPath, version)
	return cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeApplication, Name: mainPath, Version: version, PackageURL: purl}
}

// newBOM is a BOM of subject, which holds apps (if any), which hold deps
// (or subject holds deps directly).
func newBOM(subject cdx.Component, created time.Time, apps, deps []cdx.Component) *cdx.BOM {
	bom := cdx.NewBOM()
	sum := sha256.Sum256([]byte(subject.BOMRef))
	// A name-based UUID (version 8) of the subject: the same release, the same serial.
	sum[6] = sum[6]&0x0f | 0x80
	sum[8] = sum[8]&0x3f | 0x80
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	bom.Metadata = &cdx.Metadata{
		Timestamp: created.UTC().Format(time.RFC3339),
		Tools:     &cdx.ToolsChoice{Components: &[]cdx.Component{toolComponent()}},
		Component: &subject,
	}
	components := append(append([]cdx.Component{}, apps...), deps...)
	bom.Components = &components

	var depRefs []string
	for _, d := range deps {
		depRefs = append(depRefs, d.BOMRef)
	}
	holder := subject.BOMRef
	var graph []cdx.Dependency
	for _, a := range apps {
		graph = append(graph, cdx.Dependency{Ref: holder, Dependencies: &[]string{a.BOMRef}})
		holder = a.BOMRef
	}
	graph = append(graph, cdx.Dependency{Ref: holder, Dependencies: &depRefs})
	bom.Dependencies = &graph
	return bom
}

// toolComponent names what wrote the BOM: cyclonedx-go at the version
// this program was built with.
func toolComponent() cdx.Component {
	c := cdx.Component{Type: cdx.ComponentTypeLibrary, Name: "github.com/CycloneDX/cyclonedx-go"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == c.Name {
				c.Version = d.Version
			}
		}
	}
	return c
}

// goComponents reads the build information of bins (builds of one main
// module) and returns the main module's path and one library per module
// the binaries hold, plus the Go standard library, sorted by path. The
// binaries must agree on each module's version.
func goComponents(bins []string) (string, []cdx.Component, error) {
	var mainPath, goVersion string
	mods := map[string]*debug.Module{}
	for _, b := range bins {
		bi, err := buildinfo.ReadFile(b)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", b, err)
		}
		if mainPath != "" && (bi.Main.Path != mainPath || bi.GoVersion != goVersion) {
			return "", nil, fmt.Errorf("%s: %s built by %s, not %s by %s", b, bi.Main.Path, bi.GoVersion, mainPath, goVersion)
		}
		mainPath, goVersion = bi.Main.Path, bi.GoVersion
		for _, d := range bi.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			if seen, ok := mods[m.Path]; ok && seen.Version != m.Version {
				return "", nil, fmt.Errorf("%s: module %s %s, another binary has %s", b, m.Path, m.Version, seen.Version)
			}
			mods[m.Path] = m
		}
	}
	if mainPath == "" {
		return "", nil, fmt.Errorf("no build information in %v", bins)
	}
	paths := make([]string, 0, len(mods))
	for p := range mods {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	std := goPURL("stdlib", goVersion)
	comps := []cdx.Component{{BOMRef: std, Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: goVersion, PackageURL: std}}
	for _, p := range paths {
		m := mods[p]
		purl := goPURL(m.Path, m.Version)
		c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: purl}
		if m.Sum != "" {
			c.Properties = &[]cdx.Property{{Name: goSumProperty, Value: m.Sum}}
		}
		comps = append(comps, c)
	}
	return mainPath, comps, nil
}

// goPURL is the package URL pkg:golang/PATH@VERSION ("+" in a version, as in
// +incompatible, percent-encoded).
func goPURL(path, version string) string {
	return "pkg:golang/" + path + "@" + strings.ReplaceAll(version, "+", "%2B")
}

// writeSBOM writes bom as indented CycloneDX JSON.
func writeSBOM(out string, bom *cdx.BOM) error {
	var b bytes.Buffer
	if err := cdx.NewBOMEncoder(&b, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom); err != nil {
		return err
	}
	return writeFileAtomic(out, b.Bytes())
}
