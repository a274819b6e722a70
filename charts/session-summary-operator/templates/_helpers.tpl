{{/* Chart name, truncated to a DNS label. */}}
{{- define "sso.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart, unless the release name already has it. */}}
{{- define "sso.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Cluster-scoped objects carry the namespace too: one release name may exist in two namespaces. */}}
{{- define "sso.clusterName" -}}
{{- printf "%s-%s" (include "sso.fullname" .) .Release.Namespace | trunc 253 | trimSuffix "-" }}
{{- end }}

{{/* The ClusterRoles agents and people bind (templates/agent-roles.yaml). */}}
{{- define "sso.sunsetRoleName" -}}
{{- printf "%s-sunset" (include "sso.clusterName" . | trunc 246 | trimSuffix "-") }}
{{- end }}

{{- define "sso.forgetRoleName" -}}
{{- printf "%s-forget" (include "sso.clusterName" . | trunc 246 | trimSuffix "-") }}
{{- end }}

{{- define "sso.viewRoleName" -}}
{{- printf "%s-view" (include "sso.clusterName" . | trunc 248 | trimSuffix "-") }}
{{- end }}

{{- define "sso.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sso.labels" -}}
helm.sh/chart: {{ include "sso.chart" . }}
app.kubernetes.io/name: {{ include "sso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: session-summary-operator
{{- end }}

{{/* Selector labels of the operator pods (immutable once installed). */}}
{{- define "sso.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "sso.chromaSelectorLabels" -}}
app.kubernetes.io/name: {{ include "sso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: chroma
{{- end }}

{{- define "sso.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sso.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sso.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "sso.chromaImage" -}}
{{- $img := .Values.chroma.bundled.image }}
{{- if $img.repository }}
{{- printf "%s:%s" $img.repository (required "chroma.bundled.image.tag is required with chroma.bundled.image.repository" $img.tag) }}
{{- else }}
{{- include "sso.image" . }}
{{- end }}
{{- end }}

{{- define "sso.chromaFullname" -}}
{{- printf "%s-chroma" (include "sso.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Chroma URL the default SessionSummarizer uses. */}}
{{- define "sso.chromaUrl" -}}
{{- if .Values.chroma.bundled.enabled }}
{{- printf "http://%s.%s.svc:%v" (include "sso.chromaFullname" .) .Release.Namespace .Values.chroma.bundled.port }}
{{- else }}
{{- required "chroma.url is required unless chroma.bundled.enabled" .Values.chroma.url }}
{{- end }}
{{- end }}

{{/* The Secret holding the bundled Chroma's token: an existing one, or the chart's own. */}}
{{- define "sso.chromaTokenSecret" -}}
{{- default (printf "%s-token" (include "sso.chromaFullname" .)) .Values.chroma.bundled.auth.existingSecret }}
{{- end }}

{{- define "sso.chromaAuth" -}}
{{- if and .Values.chroma.bundled.enabled .Values.chroma.bundled.auth.enabled }}true{{ end }}
{{- end }}

{{/* The bundled Chroma's own port: behind the gate (loopback, port + 1) or the Service's. */}}
{{- define "sso.chromaServerPort" -}}
{{- if include "sso.chromaAuth" . }}{{ add1 .Values.chroma.bundled.port }}{{ else }}{{ .Values.chroma.bundled.port }}{{ end }}
{{- end }}

{{/* The token the default SessionSummarizer sends, as JSON {name, key}; {} for none. */}}
{{- define "sso.storeAuthSecret" -}}
{{- if include "sso.chromaAuth" . }}
{{- dict "name" (include "sso.chromaTokenSecret" .) "key" "token" | toJson }}
{{- else if .Values.chroma.authSecret.name }}
{{- dict "name" .Values.chroma.authSecret.name "key" .Values.chroma.authSecret.key | toJson }}
{{- else }}
{{- dict | toJson }}
{{- end }}
{{- end }}

{{/* The TCP port of an external chroma.url (its scheme's default when it names none). */}}
{{- define "sso.externalChromaPort" -}}
{{- $u := urlParse .Values.chroma.url }}
{{- $hostport := regexReplaceAll "^\\[[^]]*\\]" $u.host "h" }}
{{- if contains ":" $hostport }}{{ last (splitList ":" $hostport) }}{{ else if eq $u.scheme "https" }}443{{ else }}80{{ end }}
{{- end }}

{{/* The API server as an egress rule (JSON): networkPolicy.apiServer.cidrs, else the
addresses and ports of the `kubernetes` EndpointSlice found at install; `helm template` has
no cluster to ask, so there the cidrs are required. */}}
{{- define "sso.apiServerEgress" -}}
{{- $np := .Values.networkPolicy }}
{{- $to := list }}
{{- $ports := list }}
{{- range $np.apiServer.ports }}{{ $ports = append $ports (dict "port" (int .) "protocol" "TCP") }}{{ end }}
{{- range $np.apiServer.cidrs }}{{ $to = append $to (dict "ipBlock" (dict "cidr" .)) }}{{ end }}
{{- if not $to }}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" }}
{{- range ($slice.endpoints | default list) }}
{{- range .addresses }}
{{- $to = append $to (dict "ipBlock" (dict "cidr" (printf "%s/%s" . (ternary "128" "32" (contains ":" .))))) }}
{{- end }}
{{- end }}
{{- range ($slice.ports | default list) }}
{{- $port := dict "port" (int .port) "protocol" "TCP" }}
{{- if not (has $port $ports) }}{{ $ports = append $ports $port }}{{ end }}
{{- end }}
{{- end }}
{{- if not $to }}
{{- fail "networkPolicy.apiServer.cidrs is required: the API server's addresses could not be discovered (helm template asks no cluster); set them, e.g. from `kubectl get endpointslice -n default kubernetes`" }}
{{- end }}
{{- dict "to" $to "ports" $ports | toJson }}
{{- end }}

{{/* An external chroma.url's destination (NetworkPolicyPeers, JSON): networkPolicy.chromaTo,
else its address when the URL's host is an IP, else the Pods of the in-cluster Service it
names (found at install); anything else must be given. */}}
{{- define "sso.externalChromaPeers" -}}
{{- $peers := .Values.networkPolicy.chromaTo | default list }}
{{- if not $peers }}
{{- $host := (urlParse .Values.chroma.url).host }}
{{- $host = ternary (regexReplaceAll "^\\[([^]]*)\\].*$" $host "${1}") (first (splitList ":" $host)) (hasPrefix "[" $host) }}
{{- if contains ":" $host }}
{{- $peers = list (dict "ipBlock" (dict "cidr" (printf "%s/128" $host))) }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+){3}$" $host }}
{{- $peers = list (dict "ipBlock" (dict "cidr" (printf "%s/32" $host))) }}
{{- else }}
{{- $parts := splitList "." $host }}
{{- $ns := .Release.Namespace }}
{{- if gt (len $parts) 1 }}{{ $ns = index $parts 1 }}{{ end }}
{{- if or (lt (len $parts) 3) (eq (index (concat $parts (list "" "" "")) 2) "svc") }}
{{- $svc := lookup "v1" "Service" $ns (first $parts) }}
{{- with ($svc.spec | default dict).selector }}
{{- $peers = list (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" $ns)) "podSelector" (dict "matchLabels" .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $peers }}
{{- fail (printf "networkPolicy.chromaTo is required: the destination of chroma.url %s could not be found (not an IP, nor an in-cluster Service with a selector seen at install; helm template asks no cluster)" .Values.chroma.url) }}
{{- end }}
{{- toJson $peers }}
{{- end }}

{{- define "sso.summarizerNamespace" -}}
{{- default .Release.Namespace .Values.summarizer.namespace }}
{{- end }}

{{/* The only Secrets the operator may read, as a JSON list: those the values name. */}}
{{- define "sso.secretNames" -}}
{{- $names := list }}
{{- $store := include "sso.storeAuthSecret" . | fromJson }}
{{- range (list (get $store "name") .Values.summarizer.embedding.apiKeySecret.name .Values.summarizer.model.apiKeySecret.name) }}
{{- if . }}{{ $names = append $names . }}{{ end }}
{{- end }}
{{- range .Values.rbac.extraSecretNames }}
{{- if . }}{{ $names = append $names . }}{{ end }}
{{- end }}
{{- $names | uniq | sortAlpha | toJson }}
{{- end }}

{{/*
What the operator needs in every namespace it serves: SessionSummaries are created and
patched by the sweep, patched by claims and kopf, deleted by retention; SessionSummarizers
only read and annotated (their spec is the user's; see admissionpolicy.yaml). The peering rules are separate
(namespaced kopfpeerings, or clusterkopfpeerings cluster-wide). Secrets: only the named
ones, and no rule at all when none is named (a rule with empty resourceNames would grant
every Secret).
*/}}
{{- define "sso.operatorRules" -}}
- apiGroups: [memorycore.io]
  resources: [sessionsummaries]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [memorycore.io]
  resources: [sessionsummarizers]
  verbs: [get, list, watch, patch]
- apiGroups: [memorycore.io]
  resources: [sessionsummaries/status, sessionsummarizers/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, get, patch]
{{- $secrets := include "sso.secretNames" . | fromJsonArray }}
{{- if $secrets }}
- apiGroups: [""]
  resources: [secrets]
  resourceNames: {{ toJson $secrets }}
  verbs: [get]
{{- end }}
{{- end }}

{{/* kopf watches every peering object of its kind and patches its own; the operator creates it if absent. */}}
{{- define "sso.peeringRules" -}}
{{- $resource := ternary "kopfpeerings" "clusterkopfpeerings" (gt (len .Values.watchNamespaces) 0) -}}
- apiGroups: [kopf.dev]
  resources: [{{ $resource }}]
  verbs: [list, watch, create]
- apiGroups: [kopf.dev]
  resources: [{{ $resource }}]
  resourceNames: [{{ .Values.peering.name | quote }}]
  verbs: [get, patch]
{{- end }}

{{/*
The per-session write claims (cluster-scoped SessionClaim objects): in both modes, so that
two installs or two namespaces writing one Chroma still get one writer per session.
*/}}
{{- define "sso.claimRules" -}}
- apiGroups: [memorycore.io]
  resources: [sessionclaims]
  verbs: [get, list, create, update, delete]
# The cluster's identity, which issues the claims' fences (docs/architecture.md): the UID of
# kube-system, read once per process.
- apiGroups: [""]
  resources: [namespaces]
  resourceNames: [kube-system]
  verbs: [get]
{{- end }}

{{/*
Cluster-scoped reads kopf needs in both modes: CRDs (to notice new or changed resource
versions) and, when it serves a list of namespaces, namespaces (without list/watch it retries
the listing nine times, logging errors, and serves nothing for about a minute at every start).
*/}}
{{- define "sso.observationRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- if .Values.watchNamespaces }}
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}
{{- end }}

{{/* Checks that values agree with each other; fails the render with a message otherwise. */}}
{{- define "sso.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.peering.enabled) }}
{{- fail "replicaCount > 1 needs peering.enabled: without peering every replica would write" }}
{{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- range .Values.extraEnv }}
{{- if eq .name "SSO_PEERING_PRIORITY" }}
{{- fail "SSO_PEERING_PRIORITY in extraEnv gives every replica the same peering priority: kopf pauses them all and nothing is summarized; leave it unset (each replica draws its own)" }}
{{- end }}
{{- end }}
{{- end }}
{{- $o := .Values.operator }}
{{- $renew := $o.claimRenewSeconds | default (divf $o.claimTtlSeconds 3) }}
{{- if ge (float64 $renew) (subf $o.claimTtlSeconds $o.claimMarginSeconds) }}
{{- fail (printf "operator.claimRenewSeconds (%v; empty: claimTtlSeconds / 3) must be shorter than operator.claimTtlSeconds - operator.claimMarginSeconds (%v): a pass would stop writing before its first renewal" $renew (subf $o.claimTtlSeconds $o.claimMarginSeconds)) }}
{{- end }}
{{- if and .Values.summarizer.create .Values.watchNamespaces (not (has (include "sso.summarizerNamespace" .) .Values.watchNamespaces)) }}
{{- fail (printf "summarizer.namespace %q is not in watchNamespaces %v: the operator would never see it" (include "sso.summarizerNamespace" .) .Values.watchNamespaces) }}
{{- end }}
{{- if and (eq .Values.summarizer.model.backend "openai") (or (not .Values.summarizer.model.baseUrl) (not .Values.summarizer.model.model)) }}
{{- fail "summarizer.model.backend openai needs summarizer.model.baseUrl and summarizer.model.model" }}
{{- end }}
{{- if and .Values.summarizer.create (include "sso.chromaAuth" .) (le (float64 .Values.summarizer.store.timeoutSeconds) (float64 .Values.chroma.bundled.auth.forwardTimeoutSeconds)) }}
{{- fail (printf "summarizer.store.timeoutSeconds (%v) must be longer than chroma.bundled.auth.forwardTimeoutSeconds (%v): the operator would give up on a write the gate still forwards" .Values.summarizer.store.timeoutSeconds .Values.chroma.bundled.auth.forwardTimeoutSeconds) }}
{{- end }}
{{- if and (eq .Values.summarizer.embedding.provider "openai") (not .Values.summarizer.embedding.baseUrl) }}
{{- fail "summarizer.embedding.provider openai needs summarizer.embedding.baseUrl" }}
{{- end }}
{{- /* The summarizer's endpoints receive what is read from its store: with no Secret whose
owner says otherwise (an existing one may carry memorycore.io/allowed-model-urls), the
operator allows only operator.allowedModelUrls, so an endpoint outside it would fail every
pass (MemoryDestinationNotAllowed). A prefix with a wildcard is left to the operator. */}}
{{- if and .Values.summarizer.create (not .Values.chroma.authSecret.name) (not (and (include "sso.chromaAuth" .) .Values.chroma.bundled.auth.existingSecret)) }}
{{- $s := .Values.summarizer }}
{{- range $field, $url := dict "embedding" (ternary $s.embedding.baseUrl "" (eq $s.embedding.provider "openai")) "model" (ternary $s.model.baseUrl "" (eq $s.model.backend "openai")) }}
{{- $ok := not $url }}
{{- range $.Values.operator.allowedModelUrls }}
{{- if or (contains "*" .) (eq (trimSuffix "/" $url) (trimSuffix "/" .)) (hasPrefix (printf "%s/" (trimSuffix "/" .)) $url) }}{{ $ok = true }}{{ end }}
{{- end }}
{{- if not $ok }}
{{- fail (printf "summarizer.%s.baseUrl %s may not receive the memories: add it to operator.allowedModelUrls (docs/security.md; values-neo.yaml sets both)" $field $url) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
