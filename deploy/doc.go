// Package deploy holds the tests of what operators deploy: the container
// image that make image writes (deploy/image.sh, tools/image) and the Helm
// chart in deploy/helm/toolgate. It has no code of its own.
package deploy
