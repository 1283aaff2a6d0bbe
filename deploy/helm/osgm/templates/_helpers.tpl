{{/* Labels every object of the release carries; component names the part. */}}
{{- define "osgm.labels" -}}
app.kubernetes.io/name: osgm
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{- define "osgm.selector" -}}
app.kubernetes.io/name: osgm
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The NATS URLs clients are given: every server, by its stable name. */}}
{{- define "osgm.natsURLs" -}}
{{- $urls := list -}}
{{- $scheme := ternary "tls" "nats" (ne .Values.nats.tls.secret "") -}}
{{- range $i := until (int .Values.nats.replicas) -}}
{{- $urls = append $urls (printf "%s://%s-nats-%d.%s-nats-headless:4222" $scheme $.Release.Name $i $.Release.Name) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end }}

{{- define "osgm.minWorkers" -}}
{{- ternary .Values.workers.replicas .Values.coordinator.minWorkers (eq (int .Values.coordinator.minWorkers) 0) -}}
{{- end }}

{{/* Non-root, read-only, nothing gained: every container. */}}
{{- define "osgm.containerSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities: {drop: [ALL]}
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* A lost node's pods move after nodeLostSeconds, not 300 s. */}}
{{- define "osgm.tolerations" -}}
tolerations:
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: {{ int .Values.nodeLostSeconds }}}
  - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: {{ int .Values.nodeLostSeconds }}}
{{- end }}

{{/* What both clients mount: the password's Secret, the CA, S3's file. */}}
{{- define "osgm.clientEnv" -}}
- name: NATS_PASSWORD_FILE
  value: /etc/osgm/passwords/{{ .user }}-password
{{- if ne .root.Values.nats.tls.secret "" }}
- name: NATS_CA_FILE
  value: /etc/osgm/tls/ca.pem
{{- end }}
{{- if .s3 }}
{{- if ne .root.Values.s3.credentials "" }}
- name: AWS_SHARED_CREDENTIALS_FILE
  value: /etc/osgm/s3/credentials
{{- end }}
{{- with .root.Values.s3.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .root.Values.s3.region }}
- name: AWS_REGION
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "osgm.clientMounts" -}}
- {name: passwords, mountPath: /etc/osgm/passwords, readOnly: true}
{{- if ne .root.Values.nats.tls.secret "" }}
- {name: tls, mountPath: /etc/osgm/tls, readOnly: true}
{{- end }}
{{- if and .s3 (ne .root.Values.s3.credentials "") }}
- {name: s3, mountPath: /etc/osgm/s3, readOnly: true}
{{- end }}
{{- end }}

{{- define "osgm.clientVolumes" -}}
- name: passwords
  secret:
    secretName: {{ .root.Values.secrets.passwords }}
    items: [{key: {{ .user }}-password, path: {{ .user }}-password}]
{{- if ne .root.Values.nats.tls.secret "" }}
- name: tls
  secret:
    secretName: {{ .root.Values.nats.tls.secret }}
    items: [{key: ca.pem, path: ca.pem}]
{{- end }}
{{- if and .s3 (ne .root.Values.s3.credentials "") }}
- name: s3
  secret:
    secretName: {{ .root.Values.s3.credentials }}
    items: [{key: credentials, path: credentials}]
{{- end }}
{{- end }}

{{/* Values that contradict each other fail the install, saying which. */}}
{{- define "osgm.validate" -}}
{{- $v := .Values -}}
{{- if lt (int $v.workers.replicas) 1 -}}
{{- fail (printf "workers.replicas is %v: at least one worker is needed to train" $v.workers.replicas) -}}
{{- end -}}
{{- if not (has (int $v.nats.replicas) (list 1 3)) -}}
{{- fail (printf "nats.replicas is %v: 1, or 3 (JetStream's quorum of three)" $v.nats.replicas) -}}
{{- end -}}
{{- if and (eq (int $v.nats.replicas) 3) (eq $v.nats.tls.secret "") -}}
{{- fail "nats.replicas is 3 but nats.tls.secret is empty: routes between the servers carry TLS and a password (make the Secret from scripts/certs.sh's files)" -}}
{{- end -}}
{{- if eq $v.secrets.passwords "" -}}
{{- fail "secrets.passwords is empty: name the Secret holding coordinator-password and worker-password" -}}
{{- end -}}
{{- if and (eq $v.data.claim "") (eq $v.data.url "") -}}
{{- fail "no training file: set data.claim (a PVC holding data.file) or data.url (s3://bucket/key)" -}}
{{- end -}}
{{- if and (ne $v.data.claim "") (ne $v.data.url "") -}}
{{- fail "data.claim and data.url both set: the training file comes from one of them" -}}
{{- end -}}
{{- if and (ne $v.data.url "") (not (hasPrefix "s3://" $v.data.url)) -}}
{{- fail (printf "data.url %q: only s3://bucket/key (a file goes in a PVC, data.claim)" $v.data.url) -}}
{{- end -}}
{{- if and (eq $v.model.claim "") (eq $v.model.url "") -}}
{{- fail "no place for the model: set model.claim (a PVC the coordinator writes model.file into) or model.url (s3://bucket/key)" -}}
{{- end -}}
{{- if and (ne $v.model.claim "") (ne $v.model.url "") -}}
{{- fail "model.claim and model.url both set: the model goes to one of them" -}}
{{- end -}}
{{- if and (ne $v.model.url "") (not (hasPrefix "s3://" $v.model.url)) -}}
{{- fail (printf "model.url %q: only s3://bucket/key (a file goes in a PVC, model.claim)" $v.model.url) -}}
{{- end -}}
{{- if gt (int (include "osgm.minWorkers" .)) (int $v.workers.replicas) -}}
{{- fail (printf "coordinator.minWorkers (%v) is more than workers.replicas (%v): the run would wait for ever" $v.coordinator.minWorkers $v.workers.replicas) -}}
{{- end -}}
{{- end }}
