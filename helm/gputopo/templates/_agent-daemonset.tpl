{{/*
One agent DaemonSet for one GPU vendor. Called with (dict "root" $ "backend"
B "pool" P): B is nvidia, amd or auto and decides the agent's flag, its
nodes, tolerations, runtime class, image and device access; P is "" for the
release's agent (agent.backend) and "amd" for the second DaemonSet on the
AMD nodes (agent.amd.enabled), which carries a pool label so that the two
selectors differ (the first one's selector is immutable and stays as it was).
*/}}
{{- define "gputopo.agent.daemonset" -}}
{{- $root := .root }}
{{- $b := .backend }}
{{- $a := $root.Values.agent }}
{{- $nvidia := ne $b "amd" }}
{{- $amd := ne $b "nvidia" }}
{{- $privileged := and $amd $a.amd.privileged }}
{{- $image := $a.image }}
{{- if and $amd $a.amd.image.repository }}
{{- $image = $a.amd.image }}
{{- end }}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "gputopo.agent.fullname" $root }}{{ if .pool }}-{{ .pool }}{{ end }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gputopo.agent.labels" $root | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "gputopo.agent.selectorLabels" $root | nindent 6 }}
      {{- with .pool }}
      gputopo.dev/agent-pool: {{ . }}
      {{- end }}
  {{- with $a.updateStrategy }}
  updateStrategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  template:
    metadata:
      labels:
        {{- include "gputopo.agent.labels" $root | nindent 8 }}
        {{- with .pool }}
        gputopo.dev/agent-pool: {{ . }}
        {{- end }}
        {{- with $a.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $a.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "gputopo.agent.serviceAccountName" $root }}
      # The bound token names the node; the admission policy checks it.
      automountServiceAccountToken: true
      enableServiceLinks: false
      {{- with $a.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with ternary $a.runtimeClassName $a.amd.runtimeClassName $nvidia }}
      runtimeClassName: {{ . }}
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      affinity:
        {{- if and (not .pool) $a.affinity }}
        {{- toYaml $a.affinity | nindent 8 }}
        {{- else }}
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              {{- if $nvidia }}
              {{- toYaml $a.nodeSelectorTerms | nindent 14 }}
              {{- end }}
              {{- if $amd }}
              {{- toYaml $a.amd.nodeSelectorTerms | nindent 14 }}
              {{- end }}
        {{- end }}
      {{- with (and (not .pool) $a.nodeSelector) }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with concat (ternary $a.tolerations list $nvidia) (ternary $a.amd.tolerations list $amd) $a.extraTolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $a.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: agent
          image: {{ include "gputopo.image" (dict "image" $image "appVersion" $root.Chart.AppVersion) }}
          imagePullPolicy: {{ $a.image.pullPolicy }}
          args:
            - run
            - {{ get (dict "nvidia" "--nvml" "amd" "--amd-smi" "auto" "--backend=auto") $b }}
            {{- with $a.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            {{- if $nvidia }}
            # NVML from the NVIDIA container runtime, as GPU Feature Discovery
            # gets it; no nvidia.com/gpu request, so no GPU is taken.
            - name: NVIDIA_VISIBLE_DEVICES
              value: all
            - name: NVIDIA_DRIVER_CAPABILITIES
              value: utility
            {{- end }}
            - name: GPUTOPO_SYSFS_ROOT
              value: /host/sys
            - name: GPUTOPO_GFD_COMPATIBLE_LABELS
              value: {{ $a.gfdCompatibleLabels | quote }}
            - name: GPUTOPO_RESCAN_INTERVAL
              value: {{ $a.rescanInterval | quote }}
            - name: GPUTOPO_MAX_BACKOFF
              value: {{ $a.maxBackoff | quote }}
            - name: GPUTOPO_LISTEN
              value: "0.0.0.0:{{ $a.port }}"
            - name: GPUTOPO_SCAN_TIMEOUT
              value: {{ $a.scanTimeout | quote }}
            - name: GPUTOPO_POD_RESOURCES
              value: {{ $a.podResources.enabled | quote }}
            {{- if $a.podResources.enabled }}
            - name: GPUTOPO_POD_RESOURCES_SOCKET
              value: /var/lib/kubelet/pod-resources/kubelet.sock
            - name: GPUTOPO_ALLOCATIONS_HEARTBEAT
              value: {{ $a.podResources.heartbeat | quote }}
            {{- end }}
            {{- if $a.linkDevices.enabled }}
            - name: GPUTOPO_LINK_DEVICES
              value: "true"
            - name: GPUTOPO_KUBELET_PLUGINS_DIR
              value: {{ $a.linkDevices.pluginsHostPath | quote }}
            - name: GPUTOPO_KUBELET_REGISTRY_DIR
              value: {{ $a.linkDevices.registryHostPath | quote }}
            {{- end }}
            {{- with and $nvidia $a.nvmlLibrary }}
            - name: GPUTOPO_NVML_LIBRARY
              value: {{ . | quote }}
            {{- end }}
            {{- with and $amd $a.amd.library }}
            - name: GPUTOPO_AMD_SMI_LIBRARY
              value: {{ . | quote }}
            {{- end }}
            - name: GPUTOPO_LOG_FORMAT
              value: {{ $root.Values.logFormat | quote }}
            - name: RUST_LOG
              value: {{ $a.logLevel | quote }}
            {{- with $a.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: http-metrics
              containerPort: {{ $a.port }}
              protocol: TCP
          # 503 once no scan round has completed for three rescan intervals
          # (or backoffs) plus the scan timeout: the loop is wedged.
          livenessProbe:
            httpGet:
              path: /healthz
              port: http-metrics
            periodSeconds: 20
            timeoutSeconds: 2
            failureThreshold: 3
          # 503 with the reason (e.g. "NVML not available: ...") until the
          # first publish and while the last round failed.
          readinessProbe:
            httpGet:
              path: /readyz
              port: http-metrics
            periodSeconds: 10
            timeoutSeconds: 2
            failureThreshold: 3
          {{- with $a.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- $sc := deepCopy ($a.securityContext | default dict) }}
            {{- if $privileged }}
            {{- /* The API server refuses privileged with allowPrivilegeEscalation false. */}}
            {{- $_ := set $sc "privileged" true }}
            {{- $_ := set $sc "allowPrivilegeEscalation" true }}
            {{- end }}
            {{- with $sc }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- if $privileged }}
            # AMD SMI opens every /dev/dri/renderD* read-write (ROCm/amdsmi,
            # amd_smi_drm.cc); no runtime adds them to a container that
            # requests no amd.com/gpu, so the container is privileged, as
            # AMD's metrics exporter and node labeller are, and uid 0, which
            # owns them (agent.amd.privileged).
            runAsUser: 0
            runAsNonRoot: false
            {{- else if or $a.podResources.enabled $a.linkDevices.enabled }}
            # The kubelet's PodResources socket is root's and only its owner
            # may write to it, which connecting needs; no group or mode lets
            # another uid in. So uid 0, with every capability still dropped
            # (no CAP_DAC_OVERRIDE: root reaches only what root owns or
            # anyone may), and only that directory mounted, read-only. The
            # kubelet's plugin directories (link devices) are root's too.
            runAsUser: 0
            runAsNonRoot: false
            {{- end }}
          volumeMounts:
            - name: host-sys
              mountPath: /host/sys
              readOnly: true
            {{- if $a.podResources.enabled }}
            - name: pod-resources
              mountPath: /var/lib/kubelet/pod-resources
              readOnly: true
            {{- end }}
            {{- if $a.linkDevices.enabled }}
            - name: kubelet-plugins
              mountPath: {{ $a.linkDevices.pluginsHostPath }}
            - name: kubelet-plugins-registry
              mountPath: {{ $a.linkDevices.registryHostPath }}
            {{- end }}
      volumes:
        - name: host-sys
          hostPath:
            path: {{ $a.sysfs.hostPath }}
            type: Directory
        {{- if $a.podResources.enabled }}
        - name: pod-resources
          hostPath:
            path: {{ $a.podResources.hostPath }}
            type: DirectoryOrCreate
        {{- end }}
        {{- if $a.linkDevices.enabled }}
        - name: kubelet-plugins
          hostPath:
            path: {{ $a.linkDevices.pluginsHostPath }}
            type: DirectoryOrCreate
        - name: kubelet-plugins-registry
          hostPath:
            path: {{ $a.linkDevices.registryHostPath }}
            type: Directory
        {{- end }}
{{- end }}

{{/*
Agent values that cannot work together fail the render, naming both.
*/}}
{{- define "gputopo.agent.validate" -}}
{{- $a := .Values.agent }}
{{- if and $a.amd.enabled (ne $a.backend "nvidia") }}
{{- fail (printf "agent.amd.enabled=true adds a DaemonSet for the AMD nodes, and agent.backend=%s already runs the agent there: two agents would write each AMD node. On a mixed cluster set agent.backend=nvidia with agent.amd.enabled=true (one DaemonSet per vendor); else unset agent.amd.enabled" $a.backend) }}
{{- end }}
{{- if and (eq $a.backend "auto") (or $a.runtimeClassName $a.amd.runtimeClassName) }}
{{- fail (printf "agent.backend=auto runs one pod spec on NVIDIA and AMD nodes, and agent.runtimeClassName=%q / agent.amd.runtimeClassName=%q names a runtime only one vendor's nodes have: set agent.backend=nvidia with agent.amd.enabled=true (one DaemonSet per vendor, each with its runtime class)" $a.runtimeClassName $a.amd.runtimeClassName) }}
{{- end }}
{{- if and (eq $a.backend "amd") $a.runtimeClassName }}
{{- fail (printf "agent.runtimeClassName=%s is the NVIDIA runtime's, and agent.backend=amd runs no agent on NVIDIA nodes: set agent.amd.runtimeClassName for an AMD runtime, or unset agent.runtimeClassName" $a.runtimeClassName) }}
{{- end }}
{{- end }}
